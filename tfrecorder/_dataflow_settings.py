"""The settings only DataflowRunner reads, grouped in ``Dataflow``
(``Options(dataflow=Dataflow(project=..., region=...))``), and their flat names
(``Options(project=...)``, ``convert(..., project=...)``, ``--project``), which
``Options`` accepts too. Its own module: one runner's settings, checked on their own;
``Options`` refuses them with any other runner.
"""

from __future__ import annotations

import dataclasses

from tfrecorder._errors import ConfigError
from tfrecorder._option_fields import option


@dataclasses.dataclass(frozen=True)
class Dataflow:
    """The settings only DataflowRunner reads: ``Options(runner="DataflowRunner",
    dataflow=Dataflow(project="my-project", region="us-central1"))``. Any other runner
    refuses them (it would ignore them)."""

    project: str | None = option(
        None, "Google Cloud project (DataflowRunner)",
        cli={"metavar": "PROJECT", "help": "Google Cloud project id (DataflowRunner)"},
        doc="the Google Cloud project id (required)")
    region: str | None = option(
        None, "Dataflow region, e.g. us-central1 (DataflowRunner)",
        cli={"metavar": "REGION",
             "help": "Dataflow region, e.g. us-central1 (DataflowRunner)"},
        doc="the Dataflow region, e.g. `us-central1` (required)")
    temp_location: str | None = option(
        None, "gs:// folder for staging (DataflowRunner); default gs://<output bucket>/"
        "tfrecorder-tmp",
        cli={"metavar": "GS_DIR",
             "help": ("gs:// folder for staged files (DataflowRunner; default: "
                      "tfrecorder-tmp in the output's bucket)")},
        doc="a `gs://` folder for staging; default `gs://<output bucket>/tfrecorder-tmp`")
    tfrecorder_wheel: str | None = option(
        None, "a wheel to stage instead of the one built from this install (DataflowRunner)",
        cli={"metavar": "WHEEL",
             "help": ("a tfrecorder wheel file to install on the workers instead of one "
                      "built from this installation (DataflowRunner)")},
        doc="a wheel to stage instead of the one built from this install")
    job_label: str | None = option(
        None, "DataflowRunner: a readable prefix of the job name",
        cli={"metavar": "LABEL", "help": "DataflowRunner: a readable prefix of the job's name"},
        doc="a readable prefix of the job's name")
    wait: bool = option(
        False, "DataflowRunner: block until the job ends, return the result",
        cli={"action": "store_true",
             "help": ("DataflowRunner: wait until the job ends and print its result "
                      "(default: print the job's id and console link, and return)")},
        doc=("block until the job ends and return its `ConversionResult` (else a "
             "`DataflowJob` with `job_id`, `console_url`, `wait()`)"))

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "wait":
                if not isinstance(value, bool):
                    raise ConfigError(f"wait={value!r}; use True or False")
            elif value is not None and not isinstance(value, str):
                raise ConfigError(f"{f.name}={value!r}; give a string")

    def given(self) -> list[str]:
        """The settings given a value other than their default, by name."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]


#: The flat names of Dataflow's settings, accepted by Options and convert.
DATAFLOW_SETTINGS = tuple(f.name for f in dataclasses.fields(Dataflow))
