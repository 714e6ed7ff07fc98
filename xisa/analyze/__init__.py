"""Turn compiled assembly into numbers: stream, histogram, classes, resources, occupancy, SHA-256."""

from xisa.analyze.model import ANALYZER_VERSION, Analysis, Instruction, Stream

__all__ = ["ANALYZER_VERSION", "Analysis", "Instruction", "Stream"]
