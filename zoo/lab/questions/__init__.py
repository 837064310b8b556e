"""The lab's questions: their configs (zoo/conf/experiment/lab/<name>.yaml) and their budgets. Imports none of the
lab's other rooms."""
