"""The command line (`python -m zoo.lab ...`): listing and running questions, the sweep's train command and its
signals, and the GPU runner. The top room: nothing else of the lab imports it."""
