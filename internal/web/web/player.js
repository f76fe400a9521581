// The recording player's page: asciinema-player, served by the hub itself,
// plays the session's asciicast file from the recordings API.
"use strict";
(function () {
  const main = document.getElementById("recording");
  const error = document.getElementById("error");
  try {
    AsciinemaPlayer.create(main.dataset.cast, document.getElementById("player"), {
      fit: "width",
      idleTimeLimit: 2,
    });
  } catch (e) {
    error.textContent = "The player couldn't start: " + e;
    error.hidden = false;
  }
})();
