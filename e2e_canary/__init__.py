"""e2e_canary: canary workloads that act like a platform user, what they measure, and the judgement of
those measurements. So far the judge (``judge.py``); the canary definitions, the runner and the verdict
over stored results follow."""
