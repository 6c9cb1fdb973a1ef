"""Storage below the run path: stored responses (the Responses API's ``store``)."""
