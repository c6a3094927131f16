"""Library catalogue API: reference solution of the `library-api` task."""
