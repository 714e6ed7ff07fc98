"""Turn compiled assembly into numbers: stream, histogram, classes, resources, occupancy, SHA-256."""

from xisa.analyze.model import Analysis, Instruction, Stream

__all__ = ["Analysis", "Instruction", "Stream"]
