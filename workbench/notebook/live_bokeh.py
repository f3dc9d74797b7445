"""A Bokeh layout shown in a notebook while a thread streams rows into it: the run panel's
charts and the comparison's (docs/jupyterlab.md, "Notebook panel")."""

from __future__ import annotations

import functools
import threading
from typing import Any


def live_bokeh_model(layout: Any, lock: threading.Lock) -> Any:
    """The widget showing ``layout``, whose rows a thread streams in holding ``lock``."""
    return _current_bokeh_model()(layout, lock)


@functools.cache
def _current_bokeh_model() -> type:
    """jupyter_bokeh's ``BokehModel`` sends its document once, when made, and patches it after:
    a view made later (the notebook reloaded, the output shown again) would draw the empty
    charts of then. This one hands every new view the document as it is now.

    Its charts go one way, kernel to browser. jupyter_bokeh's view sends back every change it
    makes to its document, the patches it has just received from the kernel included: a row
    streamed to the browser came back as the same rows streamed again, and the kernel's
    document (the one every new view is drawn from) held each of them twice. The live views have no
    Python callbacks on their charts, so it takes nothing from the browser: ranges, sizes and
    the echoes of its own patches stay in the views, and a new view draws the kernel's rows,
    each once, with ranges of its own (docs/jupyterlab.md, "Notebook panel")."""
    from bokeh.core.json_encoder import serialize_json
    from jupyter_bokeh.widgets import BokehModel

    class CurrentBokehModel(BokehModel):
        def __init__(self, model, lock: threading.Lock, **kwargs) -> None:
            self._charts_lock = None  # made with the document of now: nothing to refresh yet
            super().__init__(model, **kwargs)
            self._charts_lock = lock

        def get_state(self, key=None, drop_defaults=False) -> dict:
            # key None: the whole state, asked for by each new view (ipywidgets'
            # request_state and request_states); a changed trait sends only its own key.
            state = super().get_state(key, drop_defaults)
            if key is None and self._charts_lock is not None:
                with self._charts_lock:  # the charts' thread streams into the same document
                    state["render_bundle"] = serialize_json(self._model_to_traits(self._model))
            return state

        def _sync_model(self, _model, content: dict, _buffers: list) -> None:
            """Drop the browser's document events (see the class's maker)."""

    return CurrentBokehModel
