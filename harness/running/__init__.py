"""How a target is run: which target (spec, target, peers), the worker process it runs in (worker,
forkserver_preload, heap), one run's state (session: the tally, the contract, the budget, the saving of
failing cases; tally), the corpus of failing cases, GPUs shared between processes (gpus), signals
(interrupts), where things are (locations), and Hypothesis' profiles."""
