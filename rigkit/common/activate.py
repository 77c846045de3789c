"""The activation's name both sides use: the transient systemd unit it runs in (``systemd-run
--unit``), one activation at a time by name. The control side starts it (:mod:`rigkit.agentcmd`),
the host's activation runs in it (:mod:`rigkit.host.activate`)."""

UNIT = "rigkit-activate"
