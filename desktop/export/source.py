"""What a lane export draws, frozen when the export starts.

An ExportSource holds the trace, its images, the selected row and the configuration
they came from. Exports of the lanes paint from it and never read the window again,
so a build that lands while an export runs (the progress dialog processes events)
cannot change the frames that follow: an export shows the configuration it began on.
"""

from __future__ import annotations

from dataclasses import dataclass

from desktop.export.canvas import Frame


@dataclass(frozen=True)
class ExportSource:
    """A frozen trace, its lane images, the selected row and their configuration."""

    trace: object  # compute.Trace
    images: object  # desktop.scene.render.LaneImages
    row: int
    config: object = None  # desktop.state.config.Config

    @property
    def n_steps(self) -> int:
        return self.trace.n_steps

    def frame(self, step: int, progress: float = 1.0) -> Frame:
        """The lanes at `step`, transfers `progress` of the way along."""
        return Frame(self.trace, self.images, step, self.row, progress)

    def caption(self, step: int) -> str:
        """The step in words (the status bar's text)."""
        return self.trace.steps[step].describe()


def source_of(what) -> ExportSource:
    """`what` frozen: an ExportSource as it is, else an AppState or anything with a
    `state` (a MainWindow) as it shows now."""
    if isinstance(what, ExportSource):
        return what
    state = getattr(what, "state", what)
    return ExportSource(state.trace, state.images, state.row, state.config)
