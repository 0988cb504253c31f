"""The runtime: worker processes and their supervisor, the job model, the graph catalog."""
