"""What a user gives ``convert``, checked before anything is read or written: the
schema, the output folder, the label vocabulary, and the length of every file name a
run writes. Each bad value is a ConfigError naming it and the fix."""

from __future__ import annotations

import os
from typing import Mapping

from tfrecorder import _storage as storage
from tfrecorder._folder import index, layout, survey
from tfrecorder._inputs import labels
from tfrecorder._inputs import schema as schemas
from tfrecorder._errors import ConfigError


def output_path(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"output_dir={path!r}; give a folder path or a gs:// URI")
    path = str(path)
    reason = storage.check_scheme(path)
    if reason is not None:
        raise ConfigError(f"output directory {path}: {reason}")
    return storage.resolve(path)


#: Bytes a file name may have on the usual local file systems (ext4, XFS, APFS; NTFS
#: allows 255 UTF-16 units); an output written to gs:// stays copyable to a disk.
MAX_FILE_NAME_BYTES = 255


def check_file_names(shards: list[str], others: list[str], what: str) -> None:
    """A ConfigError naming ``what`` to shorten when a file a run writes would have a
    name over MAX_FILE_NAME_BYTES: a shard gets a longer name on its way (its staged
    task, its temporary ``.part``) and an index file beside it."""
    temp = storage.TEMP_SUFFIX_BYTES  # files written whole get a temporary name first
    extra = max(len(layout.TASK_SUFFIX) + temp, len(layout.shard_temp_name("")),
                len(index.SUFFIX) + temp)
    for name, limit in [*((n, MAX_FILE_NAME_BYTES - extra) for n in shards),
                        *((n, MAX_FILE_NAME_BYTES - temp) for n in others)]:
        size = len(name.encode("utf-8"))
        if size > limit:
            suffix = (f" ({MAX_FILE_NAME_BYTES} less {extra} for the suffix a shard file "
                      f"gets while it is written)" if limit < MAX_FILE_NAME_BYTES else "")
            raise ConfigError(
                f"{what} is too long for a file name: {shortened(name)!r} has {size} "
                f"bytes, and may have {limit}{suffix}; shorten it by {size - limit} "
                f"or more bytes")


def shortened(text: str, keep: int = 60) -> str:
    return text if len(text) <= keep else f"{text[:keep // 2]}...{text[-keep // 2:]}"


def not_writable(output_dir: str, why: str) -> ConfigError:
    return ConfigError(f"output directory {output_dir} cannot be written ({why}); give a "
                       f"folder you can write to")


def makedirs(output_dir: str) -> None:
    try:
        storage.makedirs(output_dir)
    except (NotADirectoryError, FileExistsError):
        raise survey.under_a_file(output_dir) from None
    except PermissionError:
        raise ConfigError(f"output directory {output_dir} cannot be created or written (no "
                          f"permission); give a folder you can write to") from None
    except OSError as e:
        raise ConfigError(f"output directory {output_dir} cannot be created ({e.strerror or e}); "
                          f"give a folder you can write to") from None
    if not storage.is_remote(output_dir) and not os.access(output_dir, os.W_OK | os.X_OK):
        raise not_writable(output_dir, "no permission")


def as_schema(schema) -> schemas.Schema:
    if schema is None:
        return schemas.IMAGE_CSV_SCHEMA
    if isinstance(schema, schemas.Schema):
        return schema
    if isinstance(schema, Mapping):
        if all(isinstance(v, (str, Mapping)) for v in schema.values()):
            return schemas.from_json(dict(schema))
        return schemas.Schema(schema)
    if isinstance(schema, (str, os.PathLike)):
        return schemas.from_json(str(schema))
    raise ConfigError(f"schema={schema!r}; give a tfrecorder.input_schema.Schema or a dict")


def vocabulary(value) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        path = str(value)
        try:
            # utf-8-sig, as the CSV is read: Notepad and Excel start UTF-8 with a BOM.
            names = labels.parse_labels_file(storage.read_bytes(path).decode("utf-8-sig"))
        except FileNotFoundError:
            raise ConfigError(f"label_vocabulary file {path!r} does not exist") from None
        except IsADirectoryError:
            raise ConfigError(f"label_vocabulary {path!r} is a folder; give a file with one "
                              f"label per line") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"label_vocabulary file {path!r} is not UTF-8 text ({e.reason} "
                              f"at byte {e.start}); save it as UTF-8") from None
        except OSError as e:
            raise ConfigError(f"label_vocabulary file {path!r} cannot be read: {e}") from None
    elif isinstance(value, (list, tuple)):
        names = [labels.name_of(v) for v in value]
    else:
        raise ConfigError(f"label_vocabulary={value!r}; give a list of names or a file path")
    broken = [n for n in names if "\n" in n or "\r" in n]
    if broken:
        raise ConfigError(f"label_vocabulary name {broken[0]!r} holds a line break; a labels "
                          f"file has one name per line")
    return names
