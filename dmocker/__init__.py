"""dmocker: a formally specified toolkit for the prefill->decode KV-cache handoff."""

__version__ = "0.1.0"
