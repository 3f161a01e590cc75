// Starts Swagger UI on /docs with this server's own /openapi.json. The document is fetched here so
// that "Try it out" targets the server the page came from (whatever its `servers` list says), and
// the validator badge is off: by default Swagger UI sends the document to a validator on the internet.
"use strict";

(async () => {
  const root = document.getElementById("swagger-ui");
  const base = new URL(".", document.baseURI); // "/" when the page is "/docs"
  try {
    const response = await fetch(new URL("openapi.json", base));
    if (!response.ok) throw new Error(`GET /openapi.json answered ${response.status}`);
    const spec = await response.json();
    spec.servers = [{ url: base.href.replace(/\/$/, ""), description: "this server" }];
    window.ui = window.SwaggerUIBundle({
      spec,
      dom_id: "#swagger-ui",
      deepLinking: true,
      validatorUrl: null,
      presets: [window.SwaggerUIBundle.presets.apis],
      layout: "BaseLayout",
      persistAuthorization: false,
    });
  } catch (error) {
    root.textContent = `The API reference could not be loaded: ${error.message}`;
  }
})();
