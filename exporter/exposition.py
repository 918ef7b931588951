"""``/metrics`` rendered with cached line prefixes: the same bytes as
prometheus-client's encoders, at a fraction of their cost per scrape.

prometheus-client formats every sample of every scrape from scratch: for each
label it validates and escapes the name and the value, sorts the labels and
formats the line (about 4 µs a sample; an idle exporter shows about 450
samples, one with 500 sessions about 1,700, so a scrape held the GIL for
4–19 ms, and the reader thread, whose work makes the next scrape show a
change, waited behind it). The label part of a sample line depends only on
the sample's name and labels, and a metric's ``# HELP``/``# TYPE`` lines
only on its name, type, unit and help: :class:`Exposition` asks the
library's own encoder once for each (a one-sample metric), keeps the text up
to the value, and then writes each sample as that prefix and its value.
Values still come from the library's ``collect()`` at every scrape, so
nothing is ever stale.

Whatever the fast path does not cover is the library's: ``name[]`` filters,
an encoder other than the plain text and OpenMetrics ones, and any metric
with a sample carrying a timestamp, an exemplar or a native histogram, or
(plain text) an OpenMetrics-only ``_created``/``_gsum``/``_gcount`` sample
(the library moves those to a metric of their own).
"""

from __future__ import annotations

import functools
import gzip
from math import copysign
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import exposition as _exp
from prometheus_client import metrics as _metrics
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as _om
from prometheus_client.utils import floatToGoString
from prometheus_client.values import MutexValue

#: Cached prefixes and values kept at most (session series come and go:
#: the caches are emptied when they grow past this, about 200 B an entry).
MAX_CACHED = 20000
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")
_EOF = "# EOF\n"


class _One:
    """A registry of one metric (what the library's encoders take)."""

    __slots__ = ("metric",)

    def __init__(self, metric):
        self.metric = metric

    def collect(self):
        return [self.metric]


class Exposition:
    """Renders ``registry`` (a prometheus-client ``CollectorRegistry``) for
    one encoder of :func:`prometheus_client.exposition.choose_encoder`:
    ``render(encoder)`` returns bytes equal to ``encoder(registry)``.
    Thread-safe (the caches are plain dicts; a lost insert is recomputed)."""

    def __init__(self, registry):
        self.registry = registry
        self._heads: dict = {}
        self._prefixes: dict = {}
        self._values: dict = {}

    @staticmethod
    def _kind(encoder):
        """``(cache key, OpenMetrics?)`` of an encoder the fast path covers, else None."""
        func = getattr(encoder, "func", encoder)
        if func is _exp.generate_latest:
            om = False
        elif func is _om.generate_latest:
            om = True
        else:
            return None
        if getattr(encoder, "args", ()):
            return None
        return (func, tuple(sorted(getattr(encoder, "keywords", {}).items()))), om

    def render(self, encoder) -> bytes:
        """``encoder(registry)``, from cached prefixes where it can."""
        kind = self._kind(encoder)
        if kind is None:
            return encoder(self.registry)
        key, om = kind
        prefixes, values = self._prefixes, self._values
        if len(prefixes) > MAX_CACHED or len(values) > MAX_CACHED:
            prefixes.clear()
            values.clear()
        out = []
        append = out.append

        def value(v) -> str:
            if v == 0 and copysign(1.0, v) > 0:
                return "0.0\n"
            text = values.get(v) if v else None  # (0.0 and -0.0 are one key; NaN is none)
            if text is None:
                text = floatToGoString(v) + "\n"
                if v == v:
                    values[v] = text
            return text

        for collector in _collectors(self.registry):
            rows = _children(collector)
            if rows is not None:  # one of the library's own metrics: its children read directly
                metric = collector.describe()[0]
                name = metric.name
                head = self._head(metric, encoder, key, om)
                append(head)
                labelnames = collector._labelnames
                for labelvalues, sname, extra, v in rows:
                    pk = (key, sname, labelvalues, extra)
                    prefix = prefixes.get(pk)
                    if prefix is None:
                        one = Metric(name, metric.documentation, metric.type, metric.unit)
                        one.add_sample(sname, {**dict(zip(labelnames, labelvalues)), **dict(extra)}, 0.0)
                        line = self._line(encoder, om, one, head)
                        prefix = prefixes[pk] = line[: line.rindex(" ") + 1]
                    append(prefix)
                    append(value(v))
                continue
            for metric in collector.collect():
                self._metric(metric, encoder, key, om, append, value)
        if om:
            append(_EOF)
        return "".join(out).encode("utf-8")

    def _head(self, metric, encoder, key, om: bool) -> str:
        """The HELP/TYPE (and UNIT) lines of ``metric``, cached per format."""
        hk = (key, metric.name, metric.type, metric.unit, metric.documentation)
        head = self._heads.get(hk)
        if head is None:
            head = self._heads[hk] = self._line(encoder, om, Metric(metric.name, metric.documentation, metric.type,
                                                                    metric.unit), None)
        return head

    def _metric(self, metric, encoder, key, om: bool, append, value) -> None:
        """Append the lines of one collected ``metric`` (from cached prefixes
        where it can; else the library's encoder for it alone)."""
        samples = metric.samples
        name = metric.name
        if any(s.timestamp is not None or s.exemplar or s.native_histogram
               or (not om and s.name.startswith(name) and s.name[len(name):] in _OM_SUFFIXES)
               for s in samples):
            text = encoder(_One(metric)).decode("utf-8")
            append(text[: -len(_EOF)] if om and text.endswith(_EOF) else text)
            return
        prefixes = self._prefixes
        head = self._head(metric, encoder, key, om)
        append(head)
        for s in samples:
            pk = (key, name, s.name, tuple(s.labels.items()))
            prefix = prefixes.get(pk)
            if prefix is None:
                one = Metric(name, metric.documentation, metric.type, metric.unit)
                one.add_sample(s.name, s.labels, 0.0)
                line = self._line(encoder, om, one, head)
                prefix = prefixes[pk] = line[: line.rindex(" ") + 1]
            append(prefix)
            append(value(s.value))

    @staticmethod
    def _line(encoder, om: bool, metric, head: str | None) -> str:
        """The encoder's text for ``metric`` without the EOF line; with
        ``head`` (the metric's header lines), only what follows it."""
        text = encoder(_One(metric)).decode("utf-8")
        if om and text.endswith(_EOF):
            text = text[: -len(_EOF)]
        return text[len(head):] if head is not None else text


def _collectors(registry) -> list:
    """The collectors of ``registry`` in its own order (what its
    ``collect()`` walks), or ``[registry]`` for anything but a plain
    ``CollectorRegistry`` without target info."""
    if type(registry) is not CollectorRegistry or getattr(registry, "_target_info", None) \
            or not hasattr(registry, "_collector_to_names"):
        return [registry]
    with registry._lock:
        return list(registry._collector_to_names)


_SAMPLE_SUFFIX = {Counter: "_total", Gauge: ""}
_LE: dict[float, str] = {}


def _children(metric) -> list | None:
    """The samples of one of the library's own ``Counter``, ``Gauge`` or
    ``Histogram`` (single process, no exemplar, no ``_created`` series, no
    ``set_function``) read from its children without building ``Sample``
    tuples: ``[(label values, sample name, extra labels, value)]`` in the
    order its ``collect()`` gives them. None for anything else (the metric
    goes through ``collect()``). ``collect()`` spends about 8 µs a child
    making two tuples and a dict per sample; this reads the same values (the
    library's private attributes, checked here and by tests/test_exposition.py
    against the library's own output) in about 1 µs."""
    kind = type(metric)
    if kind not in (Counter, Gauge, Histogram) or _metrics._use_created:
        return None
    try:
        if metric._labelnames:
            with metric._lock:
                kids = list(metric._metrics.items())
        else:
            kids = [((), metric)]
        name, rows = metric._name, []
        if kind is Histogram:
            for lv, child in kids:
                bounds, acc = child._upper_bounds, 0.0
                for bound, bucket in zip(bounds, child._buckets):
                    if type(bucket) is not MutexValue or bucket._exemplar is not None:
                        return None
                    acc += bucket._value
                    le = _LE.get(bound)
                    if le is None:
                        le = _LE[bound] = floatToGoString(bound)
                    rows.append((lv, name + "_bucket", (("le", le),), acc))
                rows.append((lv, name + "_count", (), acc))
                if bounds[0] >= 0:
                    if type(child._sum) is not MutexValue:
                        return None
                    rows.append((lv, name + "_sum", (), child._sum._value))
            return rows
        sname = name + _SAMPLE_SUFFIX[kind]
        for lv, child in kids:
            v = child._value
            if type(v) is not MutexValue or v._exemplar is not None or "_child_samples" in vars(child):
                return None
            rows.append((lv, sname, (), v._value))
        return rows
    except AttributeError:  # another release of the library: its own collect()
        return None


def wsgi_app(registry):
    """A WSGI app serving ``registry`` as prometheus-client's
    ``make_wsgi_app`` does (methods, ``Accept`` and ``Accept-Encoding``
    negotiation, ``name[]`` filters, gzip), rendered by :class:`Exposition`."""
    fallback = _exp.make_wsgi_app(registry)
    exposition = Exposition(registry)

    def app(environ, start_response):
        qs = environ.get("QUERY_STRING", "")
        if environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") == "/favicon.ico" \
                or (qs and "name[]" in parse_qs(qs)):
            return fallback(environ, start_response)
        encoder, content_type = _encoder(environ.get("HTTP_ACCEPT") or "")
        output = exposition.render(encoder)
        headers = [("Content-Type", content_type)]
        if _exp.gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING")):
            output = gzip.compress(output)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [output]

    return app


@functools.lru_cache(maxsize=64)
def _encoder(accept: str):
    """``choose_encoder`` of an ``Accept`` header (a scraper sends the same one each time)."""
    return _exp.choose_encoder(accept)
