"""Provenance: what a number was measured on and with — the machine and its software
(`machine`: the ``env.*`` tags, ``fingerprint.json``, the hardware part
of a job's identity) and the user's own code (`user_code`: the
``sweeps.code_fingerprint`` tag).

Imports: `sweeps.names`, torch (the GPUs it sees), nvidia-ml-py where present; never
training code, tracking or the launcher. Importing this package loads nothing heavy.
"""
