"""Many machines (CL-6, CL-8..CL-17): slots, leases with fencing epochs in PostgreSQL, and the
machine process that serves the slots it holds (ADR 0019)."""
