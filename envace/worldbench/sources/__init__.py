"""Where `envace worldbench build` gets its task scripts: the built-in tool world (world.py) and every
benchmark registered with a `transitions` function (benchmark.py: the adapter's own replay tasks)."""
