// Starts Swagger UI over the gateway's own OpenAPI document (a file, not an inline
// script, so a Content-Security-Policy without 'unsafe-inline' allows the page).
window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,  // the default asks validator.swagger.io: no network here
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
};
