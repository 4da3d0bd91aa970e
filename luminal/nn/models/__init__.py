"""Whole models built from Hugging Face configs, with weights under Hugging Face names."""
