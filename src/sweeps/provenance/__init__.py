"""Provenance: what a number was measured on and with — the machine and its software
(:mod:`~sweeps.provenance.machine`: the ``env.*`` tags, ``fingerprint.json``, the hardware part
of a job's identity) and the user's own code (:mod:`~sweeps.provenance.user_code`: the
``sweeps.code_fingerprint`` tag).

Imports: :mod:`sweeps.names`, torch (the GPUs it sees), nvidia-ml-py where present; never
training code, tracking or the launcher. Importing this package loads nothing heavy.
"""
