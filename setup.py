from setuptools import find_packages, setup

setup(
    name="tfrecorder",
    version="0.1.0",
    description="Convert image and tabular datasets (CSV or pandas) to sharded TFRecord files, and load them back.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tfrecorder", "tfrecorder.*"]),
    # Tested on 3.11, 3.12 and 3.13 (scripts/test-pythons.sh; README).
    python_requires=">=3.11",
    install_requires=[
        "apache-beam[gcp]>=2.60",
        "gcsfs>=2024.2",
        "google-crc32c>=1.5",
        "numpy>=1.24",
        # pandas 3 works: see docs/design.md on Beam's IPython label hook.
        "pandas>=2.0",
        "pillow>=10.0",
        "tensorflow>=2.15",
        "tqdm>=4.60",
    ],
    extras_require={
        "test": [
            "gcp-storage-emulator>=2024.8",
            "hypothesis>=6.0",
            "importlib_resources>=6.0",
            "ipykernel>=6.0",
            "nbclient>=0.9",
            "nbformat>=5.9",
            "psutil>=5.9",
            "pytest>=8.0",
            "tensorflow-datasets>=4.9",
        ],
    },
    entry_points={"console_scripts": ["tfrecorder=tfrecorder.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "License :: OSI Approved :: Apache Software License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
