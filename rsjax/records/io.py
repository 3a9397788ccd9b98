"""Result files in the format of Cohen et al.'s reference code.

Certify files are tab-separated, one header line, then one row per input::

  idx	label	predict	radius	correct	time
  0	3	3	0.4380912837591553	1	15.412345

``predict`` is -1 on abstain (with radius 0.0), ``correct`` is
``int(predict == label)`` and ``time`` is in seconds. Predict files drop the
radius column (``idx label predict correct time``).

Differences from the reference, on purpose:
  * the radius is written with full precision (``repr`` of the float), not with
    3 significant digits, so that metrics computed from a file equal the ones
    computed in memory;
  * ``time`` is written as float seconds. The reader accepts both float seconds
    and ``datetime.timedelta`` strings (``0:00:15.412345``), since the
    reference writes the latter and its shipped logs the former.

Writers append one row at a time and flush and fsync each row, so a run killed
at any point (even with SIGKILL) loses at most the row in flight. On restart
:func:`resume` drops a truncated last line and returns the indices already done.
Extra columns (for example a per-input sigma) may follow the standard ones.

Rows are checked when read (by :func:`resume` and the readers): a wrong number
of fields, a non-numeric field or a repeated ``idx`` is an error naming the file
and line. Only an incomplete last line (no newline: a crash mid-write) is
dropped.

**Run record.** A writer given ``run`` (a JSON dict identifying the run: method,
model fingerprint, dataset, sigma, N, ...) keeps it next to the rows in
``<file>.run.json``, so readers that know nothing of it (pandas
``read_csv(f, sep="\t")``, Cohen et al.'s ``analyze.py``) read the file as
before. Resuming a file whose record differs raises :class:`RunMismatchError`
naming the differing fields.

**One writer at a time.** A writer holds an exclusive ``fcntl`` lock on the file
while it is open; a second writer raises :class:`ResultsLockedError`.

**Whole-file replacement.** :func:`atomic_write` (bytes, through a callback) and
:func:`atomic_write_text` replace a file atomically and durably (temporary file,
fsync, rename, fsync of the directory); rsjax writes a whole file through
them.
"""

from rsjax.records._durable import atomic_write as atomic_write
from rsjax.records._durable import atomic_write_text as atomic_write_text
from rsjax.records._durable import write_json as write_json
from rsjax.records._format import CERTIFY_COLUMNS as CERTIFY_COLUMNS
from rsjax.records._format import PREDICT_COLUMNS as PREDICT_COLUMNS
from rsjax.records._format import parse_time as parse_time
from rsjax.records._lock import ResultsLockedError as ResultsLockedError
from rsjax.records._read import CertifyResults as CertifyResults
from rsjax.records._read import PredictResults as PredictResults
from rsjax.records._read import read_certify as read_certify
from rsjax.records._read import read_predict as read_predict
from rsjax.records._read import read_results as read_results
from rsjax.records._run_record import RunMismatchError as RunMismatchError
from rsjax.records._run_record import read_run_record as read_run_record
from rsjax.records._run_record import write_run_record as write_run_record
from rsjax.records._writer import ResultsWriter as ResultsWriter
from rsjax.records._writer import resume as resume
from rsjax.records.spec import RUN_SUFFIX as RUN_RECORD_SUFFIX
from rsjax.records.spec import run_path as run_record_path

__all__ = [
  "CERTIFY_COLUMNS",
  "PREDICT_COLUMNS",
  "CertifyResults",
  "PredictResults",
  "RUN_RECORD_SUFFIX",
  "ResultsLockedError",
  "ResultsWriter",
  "RunMismatchError",
  "parse_time",
  "read_certify",
  "read_predict",
  "read_results",
  "atomic_write",
  "atomic_write_text",
  "read_run_record",
  "resume",
  "run_record_path",
  "write_json",
  "write_run_record",
]
