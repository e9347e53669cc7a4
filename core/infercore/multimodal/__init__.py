"""Images in prompts, on the front end: media loading with limits (:mod:`.media`), the model's processor and
the processed-input cache (:mod:`.inputs`), and chat content parts (:mod:`.chat_content`)."""
