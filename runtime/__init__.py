"""Runtimes: `Runtime.load(program, weights) -> Executable`; `Executable.run(inputs, dims=None)`."""
