"""How a job's processes start: `local` runs a whole job on loopback (`python -m
ps_runtime.launch`), `task` runs one task from its environment (`python -m ps_runtime.task`)."""
