"""What the tests share: helpers, case catalogues and the programs tests start in
subprocesses.  Tests import them as ``tests.support.<module>``; this package holds
no tests.

``ROOT`` is the repository's root folder, the one place that knows how deep this
package sits in it.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
