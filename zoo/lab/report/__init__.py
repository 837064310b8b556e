"""The report of a finished sweep: report.md with the verdict, the plots, the paper overlays, the work each job
did, and publishing into docs/lab.md. Imports decide, questions, measure and probes; never run."""
