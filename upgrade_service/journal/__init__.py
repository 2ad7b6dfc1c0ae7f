"""What a rotation and a remediation write to the state store: one typed record per kind (``records``,
``remediation``), the intents that let every side effect be settled after a crash (``intents``), and the folds that
read a run back (``rotation``; ``remediation.read_state``)."""
