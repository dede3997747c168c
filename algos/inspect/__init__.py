"""See a run: ``gigpo-gym inspect`` renders a run's recorded task groups (or a leaderboard run's episodes) as one
self-contained HTML page (``page``), with its charts (``plots``)."""
