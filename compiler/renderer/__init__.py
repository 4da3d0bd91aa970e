"""The one C-like renderer (render.py) and its dialects (dialects.py: C, CUDA, Metal), with the integer and
float64 spellings they share."""
