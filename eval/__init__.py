"""Evaluation: reads exported HF folders the way a server would; imports decode/, never train/."""
