"""Java scoring: the JDK + Maven image, pom-keyed dependency layers and the two profiles."""
