"""Screens: the main screen, help, and the steer / stop / quit dialogs."""
