"""The pages, one module per area: dashboard, jobs, nodes, teams, account."""
