"""The project's own passes, one module each (or a few of one theme), every one a named step of
pass_pipeline.txt (`farm-...`) where no upstream MLIR pass or Transform op does the job: registry.py names
them and runs a step; build.py runs the steps. Each returns notes on what it left as it was (an
optimization a kernel does not have the form for), else nothing; its docstring says what it does and what
it must run after, and the README lists them.
"""
