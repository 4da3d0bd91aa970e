"""The compiled program at rest: its kernel IR as JSON (artifact_json.py), its run plan, what a runtime reads
instead of planning (run_plan.py, as JSON: plan_json.py), the compile cache (cache.py) and the collector pause
that loading and saving share (gc_pause.py)."""
