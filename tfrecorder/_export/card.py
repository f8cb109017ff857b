"""The dataset card of an export: ``README.md``, whose YAML header the Hub reads.

The header's ``configs`` name each split's files (``data/{split}-*``), so the Hub and
``datasets`` need not guess the splits from the names; ``license``, ``pretty_name`` and
the rest come from the metadata the user gave. The text below says what only the
folder knows: the version exported, the records and labels of each split, and the data
report's findings (duplicates and leaks between splits).
"""

from __future__ import annotations

import json

from tfrecorder._folder.manifest import Manifest


def text(manifest: Manifest, version: int, metadata: dict, findings: dict | None) -> str:
    """The card of an export of ``manifest`` (version ``version``), with the user's
    ``metadata`` (name, description, license, ...) and the data report's counts
    ``findings`` (None without a report)."""
    # JSON strings are YAML strings: every value is written as one, quoted and escaped.
    head = ["---", "configs:", "- config_name: default", "  data_files:"]
    for split in manifest.splits:
        head += [f"  - split: {split}", f"    path: data/{split}-*"]
    if metadata.get("license"):
        head.append(f"license: {json.dumps(str(metadata['license']))}")
    head.append(f"pretty_name: {json.dumps(str(metadata.get('name') or manifest.name))}")
    head.append("---")
    body = [f"# {metadata.get('name') or manifest.name}", ""]
    if metadata.get("description"):
        body += [str(metadata["description"]), ""]
    body += [f"Version {version} of a folder written by tfrecorder, exported as Parquet "
             f"files that `datasets.load_dataset` reads as they are.", "",
             "| split | records |", "|---|---|"]
    body += [f"| {name} | {info.num_examples} |" for name, info in manifest.splits.items()]
    labelled = [(n, i.label_counts) for n, i in manifest.splits.items() if i.label_counts]
    if labelled:
        body += ["", "Records per label:", "", "| split | label | records |", "|---|---|---|"]
        body += [f"| {name} | {label} | {n} |" for name, counts in labelled
                 for label, n in counts.items()]
    if findings is not None:
        body += ["", "The data report found: "
                 + ", ".join(f"{n} {kind}" for kind, n in findings.items()) + "."
                 if findings else "The data report found no duplicates and no leaks "
                 "between splits."]
    return "\n".join(head + body) + "\n"
