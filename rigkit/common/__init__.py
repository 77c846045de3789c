"""What both sides read: parsers of the host's tools, record formats, names of host files
and units. Standard library only (tests/unit/test_layout.py); shipped in the agent's
wheel beside rigkit.host and rigkit.bench."""
