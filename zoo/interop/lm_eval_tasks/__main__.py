from zoo.interop.lm_eval_tasks import main

main()
