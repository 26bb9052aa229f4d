hello2
