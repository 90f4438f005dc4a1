"""Distillation training: the only package that imports Lightning."""
