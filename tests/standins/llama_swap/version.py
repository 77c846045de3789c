"""Version reported by ``-version`` and ``GET /api/version``.

The stand-in answers as release 250 (the pinned upstream version); ``commit`` says
it is the rigkit stand-in, never a real upstream build.
"""

VERSION = "250"
COMMIT = "rigkit-standin"
BUILD_DATE = "2026-08-14T00:00:00Z"
