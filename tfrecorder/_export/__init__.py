"""Exports: one version of a folder written in another ecosystem's format.

- ``exporting``: ``export()``, one export as one story: the version opened, each file
  written or reused, the card and the Croissant description, the folder published;
- ``target``: the export folder: its manifest (which shard made which file), the
  previous export's files reused, the folder written beside and renamed into place;
- ``parquet``: one shard's live records as a Parquet file that Hugging Face's
  ``datasets`` reads as it is (its features in the schema's metadata);
- ``webdataset``: one shard's live records as a tar file in WebDataset's layout, and
  the ``wids`` index of each split's tar files;
- ``objects``: a detection record's boxes as the Hub's detection sets hold them
  (``objects``: COCO's pixel boxes, categories, masks, keypoints), for both formats;
- ``card``: the dataset card, ``README.md``, with the configs the Hub reads;
- ``croissant``: ``croissant.json``, the Croissant 1.1 description of the files.

The wing stands on the format (``_folder``), the readers (``access``) and the data
report (``_report``); nothing below it imports it.
"""
