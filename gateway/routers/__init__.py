"""One router per resource; gateway/app.py mounts them."""
