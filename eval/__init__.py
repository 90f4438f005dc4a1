"""Evaluation: reads exported HF folders the way a server would; imports decode/, never train/. What training
shares with it (preflight, export, card, servers, provenance, tracking) is eval/shared/, which imports no evaluation."""
