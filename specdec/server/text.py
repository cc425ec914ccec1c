"""Text around the token stream: incremental detokenization with stop strings. (Chat
templates: models/chat_template.py.)"""
from __future__ import annotations

from ..models.tokenizer import Tokenizer


class TextStream:
    """Turns token ids into text deltas; holds back partial UTF-8 and possible stop-string
    starts; cuts the text at the first stop string."""

    def __init__(self, tokenizer: Tokenizer, stops: list[str]):
        self.tok, self.stops = tokenizer, [s for s in stops if s]
        self.ids: list[int] = []
        self.text = ""
        self.sent = 0            # characters already returned
        self.stopped = False

    def push(self, ids: list[int]) -> str:
        """Add tokens; return the text that is now safe to show."""
        if self.stopped:
            return ""
        self.ids.extend(ids)
        self.text = self.tok.decode(self.ids)
        if self.stops:
            hit = min((i for i in (self.text.find(s, max(0, self.sent - len(s) + 1)) for s in self.stops)
                       if i >= 0), default=-1)
            if hit >= 0:
                self.stopped = True
                self.text = self.text[:hit]
                return self._take(len(self.text))
        safe = len(self.text)
        while safe > self.sent and self.text[safe - 1] == "\ufffd":
            safe -= 1
        hold = 0                 # keep back a suffix that could start a stop string
        for s in self.stops:
            for n in range(min(len(s) - 1, safe - self.sent), hold, -1):
                if s.startswith(self.text[safe - n:safe]):
                    hold = n
                    break
        return self._take(safe - hold)

    def flush(self) -> str:
        """The request finished: return everything not yet shown."""
        return self._take(len(self.text))

    def _take(self, upto: int) -> str:
        out = self.text[self.sent:upto] if upto > self.sent else ""
        self.sent = max(self.sent, upto)
        return out
