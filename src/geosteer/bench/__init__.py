"""The steering benchmark (``geosteer bench decide``): matched levers (prompting, CAA, a preference-trained vector,
LoRA, LoReFT, geosteer's learned steering surfaces, walls) put at matched control KL, each scored on generated
text by judges that are not the model; and the text-quality and judge checks (``bench text``, ``bench judge``)."""
