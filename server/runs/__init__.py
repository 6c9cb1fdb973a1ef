"""The run path every API shares: a request (:mod:`~server.runs.request`, the chat
completion every API's request becomes) planned into one scaffold run
(:mod:`~server.runs.planning`), admitted (:mod:`~server.runs.admission`), run by
:class:`~server.runs.handler.Serving` while watching for the client to go away
(:mod:`~server.runs.disconnect`), its trace routed to choices and streamed
(:mod:`~server.runs.streaming`, :mod:`~server.runs.sse_bodies`), its answer a chat
completion object (:mod:`~server.runs.completion`), or shaped by another API's
:class:`~server.runs.wire.WireFormat`. It imports no API and not the app.
"""
