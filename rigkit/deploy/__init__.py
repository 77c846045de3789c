"""Deploying, the control side of ``deploy.py``: what a deploy applies (:mod:`rigkit.deploy.source`: the
inventory's spec rendered, or a recorded generation), the preflight's decisions
(:mod:`rigkit.deploy.preflight`), generations (:mod:`rigkit.deploy.generations`) and the agent's
wheelhouse (:mod:`rigkit.deploy.wheelhouse`). The operations and the facts they read are in
:mod:`rigkit.operations`, the roles in ``roles/``; running pyinfra is :mod:`rigkit.deploy.run`, the
change confirmed or put back under the host lock :mod:`rigkit.deploy.transaction`."""
