"""The run path every API shares: a request planned into one scaffold run
(:mod:`~server.runs.planning`), admitted (:mod:`~server.runs.admission`), run by
:class:`~server.runs.handler.Serving` while watching for the client to go away
(:mod:`~server.runs.disconnect`), its trace routed to choices and streamed
(:mod:`~server.runs.streaming`, :mod:`~server.runs.sse_bodies`), and shaped by the API's
:class:`~server.runs.wire.WireFormat`.
"""
