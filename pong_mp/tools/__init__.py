"""The tools around training, apart from the algorithm: watching (play, recording, gif),
plotting (plot) and measuring (bench)."""
