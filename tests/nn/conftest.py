"""Model tests never reach the network: Hugging Face models are built from config objects, and the one real
checkpoint (all-MiniLM-L6-v2) comes from an installed package. Set before any test imports transformers."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
