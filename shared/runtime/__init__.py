"""What every service's app is built from: the base app (settings, the database, the error
middleware, the probes), the keys under which an app shares its resources, and the long-poll
claim that the API's lease route and the in-process workers both use. Sits above the web and db
layers and below the services."""
