"""The lab: questions about Transformers answered by experiment (zoo/conf/experiment/lab/<name>.yaml), in rooms that
each import only the rooms before them: probes <- measure <- decide <- questions <- report <- run (docs/design.md)."""
