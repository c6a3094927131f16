"""One `rgbridge run` over tasks × attempts: its options as given (``options``), what its attempts
share (``settings``), its configuration and hash (``config``), the pre-flight (``preflight``),
retries and spending (``retries``), the agents' prompt (``prompt``) and the execution
(``runner``)."""
