"""The compiled program at rest: its JSON form (artifact_json.py), the compile cache (cache.py) and the
collector pause that loading and saving share (gc_pause.py)."""
