"""The compiler: passes, search, kernel IR, code generation, memory planning, compiled programs."""
