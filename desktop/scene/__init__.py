"""What the views draw, computed without widgets (NumPy and Qt geometry only): images, geometry, equations, row series."""
